"""Errors that the command line turns into one line and exit code 2.

Anything raised as ``UserInputError`` is a problem with what the user gave us (a file, a flag,
a scenario that cannot run), never a bug; the CLI prints ``error: <message>`` and exits 2.
"""


class UserInputError(ValueError):
    """Bad input: the message names the field and, where there is a closed set, the allowed values."""


class DoesNotFitError(UserInputError):
    """The scenario needs more GPU memory than the hardware has."""
