"""The benchmark tables' provenance line: the command it names can be typed again."""
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import current  # noqa: E402


def test_the_written_command_quotes_arguments_with_spaces_and_brackets(monkeypatch):
    script = str(Path(current.__file__).parent / "learning.py")
    args = ["--from-log", "sac-pendulum-bf16", "2", "run.log", "066a357, resumed at 1763655", "agent.lr=interval(1,2)"]
    monkeypatch.setattr(sys, "argv", [script, *args])
    line = current.command_line()
    assert line == ("python benchmarks/learning.py --from-log sac-pendulum-bf16 2 run.log "
                    "'066a357, resumed at 1763655' 'agent.lr=interval(1,2)'")
    assert shlex.split(line)[2:] == args
