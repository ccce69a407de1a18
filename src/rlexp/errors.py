"""User-facing errors: one line, exit code 2, no traceback."""
from hydra.errors import CompactHydraException


class UserError(Exception):
    """A mistake in the user's input; the message says what is wrong and how to fix it."""


class SweepError(UserError, CompactHydraException):
    """A mistake in a sweep's command (search space, study); Hydra prints it as one line."""


class TrialFailed(Exception):
    """A sweep trial that ended with an error; the message is the one line the sweep records."""


class Started:
    """Set once the command has got past parsing its input (the task, or a sweep's first trial), so that
    an exit code 1 from then on is a failure of the run and not a mistake in the command."""

    value = False
