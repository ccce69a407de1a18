"""User-facing errors: one line, exit code 2, no traceback."""


class UserError(Exception):
    """A mistake in the user's input; the message says what is wrong and how to fix it."""
