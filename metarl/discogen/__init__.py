"""DiscoGen interop: a metarl candidate as a DiscoGen (DiscoBench) task, run in DiscoGen's
own harness; see runtime.py (where DiscoGen runs), modules.py (the candidate as DiscoGen's
module) and task.py (the task directory)."""
