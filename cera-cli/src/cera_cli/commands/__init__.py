"""Built-in commands, one module each. `cera_cli.main.BUILTIN_COMMANDS` maps names to them."""
