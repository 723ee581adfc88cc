"""The `metarl` command line: argument handling and flow only, no business logic.

app       the Typer application; registers every command
evaluate  `metarl evaluate`
discover  `metarl discover`, `metarl resume`
archive   `metarl leaderboard`, `show`, `lineage`, `runs`, `export`
options   options shared by several commands (`--archive`, `--verbose`, durations)
errors    the one error convention: `metarl <command>: error: <message>`, exit 2 or 1
console   the consoles, and `untrusted`/`say`: the one way (model or candidate) text is printed
formats   numbers, intervals, durations, costs
board     the leaderboard and runs tables
candidate `metarl show` and `metarl lineage`
progress  a discovery run's live display and its report
verdict   `metarl evaluate`'s spinner and outcome
display   the names of the six modules above, re-exported under their former module's name
"""
