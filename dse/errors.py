"""User-facing errors. Raised once, early, with the field at fault and the fix."""


class ConfigError(ValueError):
    """Bad user input: a catalog name, a space or study file, a CLI argument.

    The message is one line that names the field and says how to fix it; the CLI
    prints it and exits with status 2.
    """
