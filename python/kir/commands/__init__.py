"""The `kir` subcommands, one module each."""

__all__: list[str] = []  # the verbs are modules: kir.commands.inspect, ... (kir.cli.COMMANDS)
