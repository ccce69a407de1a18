"""A crash inside the training loop, as `kill -9` leaves a run: nothing after it runs (no final checkpoint)."""


class Killed(BaseException):
    """The crash (a BaseException: no `except Exception` in the loop catches it)."""


def crash_in_the_third_iteration(agent) -> list[int]:
    """Make `agent`'s third training iteration crash; returns the list that collects its steps after each
    iteration that finished."""
    train, steps = agent.train_iteration, []

    def crash_in_the_third():
        if len(steps) == 2:
            raise Killed
        metrics = train()
        steps.append(agent.steps)
        return metrics

    agent.train_iteration = crash_in_the_third
    return steps
