"""mode=autotune (rlexp.commands.autotune.command), in the parts it takes: the request, the budget, the
tuned preset it writes."""
from rlexp.commands.autotune.command import autotune

__all__ = ["autotune"]
