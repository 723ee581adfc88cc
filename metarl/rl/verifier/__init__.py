"""The trusted side of the sandbox boundary: candidates reach the trainer only as exported
artifacts, which are verified before anything compiles them: the format and its limits
(`artifact.py`), the structural check of the StableHLO (`artifact_check.py`), and per-sample
independence checked by behaviour at the trainer's sizes (`behaviour.py`)."""
