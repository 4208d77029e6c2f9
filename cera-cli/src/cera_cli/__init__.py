"""The `cera` command line."""
