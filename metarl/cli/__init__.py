"""The `metarl` command line: one module per command group, no business logic here."""
