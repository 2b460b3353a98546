"""The `kir` subcommands, one module each."""
