"""The `metarl` command line: argument handling and flow only, no business logic.

app       the Typer application; registers every command
evaluate  `metarl evaluate`
discover  `metarl discover`, `metarl resume`
archive   `metarl leaderboard`, `show`, `lineage`, `runs`, `export`
options   options shared by several commands (`--archive`, `--verbose`, durations)
errors    the one error convention: `metarl <command>: error: <message>`, exit 2 or 1
display   what the commands print: rich tables, panels, the live display
"""
