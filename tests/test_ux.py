"""What a user sees and gets: play's capture options on an env that can't render, the permissions of written
files under the process umask, and the progress bar on a narrow terminal."""
import io
import os
import re
import stat
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
from forked_cli import run_cli

from rlexp.commands.init import PRESET_GROUPS
from rlexp.errors import UserError
from rlexp.runs import files
from rlexp.runs.files import write_atomic

TESTS = Path(__file__).parent
TINY = ["run.max_steps=256", "run.eval_episodes=1", "agent.n_steps=32", "env.n_envs=2"]
CORRIDOR = "defaults: [generic]\nid: MyEnvs/Corridor-v0\nn_envs: 2\nimports: [my_envs]\nkwargs: {length: 7}\n"


def rlexp(cwd: Path, *args: str, umask: int = 0o022, max_file_size: int | None = None
          ) -> subprocess.CompletedProcess:
    """The real CLI in a subprocess under `umask`, with tests/ importable (the own env package my_envs); with
    `max_file_size`, a write past that many bytes fails (EFBIG) as on a full disk."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", SDL_VIDEODRIVER="dummy",
               PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    if max_file_size is not None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return run_cli(args, cwd, env, timeout=300, umask=umask, max_file_size=max_file_size)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(scope="module")
def corridor_run(tmp_path_factory) -> Path:
    """A tiny run on an own env class that has no render modes (tests/my_envs)."""
    cwd = tmp_path_factory.mktemp("corridor")
    (cwd / "myconf/env").mkdir(parents=True)
    (cwd / "myconf/env/corridor.yaml").write_text(CORRIDOR)
    result = rlexp(cwd, "--config-dir", "myconf", "env=corridor", *TINY, "run_dir=outputs/c")
    assert result.returncode == 0, result.stderr
    return cwd


@pytest.mark.e2e
@pytest.mark.parametrize("option", ["+video_dir=videos/", "+frame_dir=shots/frames", "+render=true"])
def test_play_capture_on_an_env_that_cannot_render_is_one_line_and_makes_no_folder(corridor_run, option):
    cwd = corridor_run
    before = sorted(cwd.rglob("*"))
    result = rlexp(cwd, "mode=play", "+checkpoint=outputs/c", option)
    assert result.returncode == 2 and result.stdout == "", result.stdout + result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    key = option if option == "+render=true" else option.split("=")[0]
    mode = "human" if key == "+render=true" else "rgb_array"
    assert f"{key} needs an env that renders with render_mode='{mode}'" in result.stderr
    assert "MyEnvs/Corridor-v0 lists render_modes []" in result.stderr
    assert "metadata['render_modes']" in result.stderr and f"play without {key}" in result.stderr
    assert sorted(cwd.rglob("*")) == before  # no videos/, no shots/


@pytest.mark.filterwarnings("ignore:.*render method without specifying any render mode")
def test_python_play_on_envs_without_frames_raises_and_makes_no_folder(tmp_path):
    from rlexp import PPO, make_envs

    agent = PPO(make_envs("CartPole-v1", n_envs=2, seed=0), seed=0, n_steps=8, mini_batches=1, quiet=True)
    with pytest.raises(UserError, match="render_mode='rgb_array'"):
        agent.play(make_envs("CartPole-v1"), video_dir=tmp_path / "videos", frame_dir=tmp_path / "a/frames")
    assert list(tmp_path.iterdir()) == []
    played = agent.play(make_envs("CartPole-v1", render_mode="rgb_array"), frame_dir=tmp_path / "a/frames")
    assert len(played) == 1 and len(list((tmp_path / "a/frames").glob("play_*.jpg"))) == sum(played)


def test_play_checks_directories_without_creating_them(tmp_path):
    from rlexp.envs.playback import check_writable_dir

    assert check_writable_dir(tmp_path / "x/y", "video_dir") == tmp_path / "x/y"
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "file").write_text("")
    with pytest.raises(UserError, match=r"^\+frame_dir=.*file/videos: .*/file is a file, so .*file/videos can't be "
                                        r"made; pass a directory$"):
        check_writable_dir(tmp_path / "file/videos", "frame_dir")


@pytest.mark.parametrize("umask, expected", [(0o022, 0o644), (0o077, 0o600), (0o027, 0o640)])
def test_atomic_writes_honour_the_umask(tmp_path, umask, expected):
    previous = os.umask(umask)
    try:
        write_atomic(tmp_path / "out.bin", lambda f: f.write(b"x"))
    finally:
        os.umask(previous)
    assert mode_of(tmp_path / "out.bin") == expected and (tmp_path / "out.bin").read_bytes() == b"x"


def test_atomic_writes_read_the_umask_without_changing_it(tmp_path, monkeypatch):
    set_umask, calls = os.umask, []
    previous = set_umask(0o027)
    try:
        monkeypatch.setattr(os, "umask", lambda mask: calls.append(mask) or set_umask(mask))
        write_atomic(tmp_path / "out.bin", lambda f: f.write(b"x"))
    finally:
        set_umask(previous)
    assert mode_of(tmp_path / "out.bin") == 0o640 and calls == []


def test_atomic_writes_without_proc_set_the_umask_back(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "PROC_STATUS", str(tmp_path / "no-proc/status"))
    previous = os.umask(0o027)
    try:
        write_atomic(tmp_path / "out.bin", lambda f: f.write(b"x"))
        after = os.umask(0o027)
    finally:
        os.umask(previous)
    assert mode_of(tmp_path / "out.bin") == 0o640 and after == 0o027


def test_init_leaves_no_partial_preset_when_a_write_fails(tmp_path):
    shipped = Path(str(resources.files("rlexp.conf")))
    assert (shipped / "agent_base.yaml").stat().st_size > 1000  # the first preset init copies
    failed = rlexp(tmp_path, "mode=init", "+dir=conf", max_file_size=1000)
    lines = failed.stderr.strip().splitlines()
    assert failed.returncode == 2 and len(lines) == 1, failed.stderr
    assert lines[0].startswith("error: +dir=conf: could not write ") and "agent_base.yaml (File too large)" in lines[0]
    assert [p for p in (tmp_path / "conf").rglob("*") if p.is_file()] == []
    copied = rlexp(tmp_path, "mode=init", "+dir=conf")
    assert copied.returncode == 0, copied.stderr
    copies = {p.relative_to(tmp_path / "conf"): p.read_bytes() for p in (tmp_path / "conf").rglob("*.yaml")}
    presets = [shipped / "agent_base.yaml", *(p for group in PRESET_GROUPS for p in (shipped / group).glob("*.yaml"))]
    assert copies == {p.relative_to(shipped): p.read_bytes() for p in presets}
    assert Path("agent/ppo.yaml") in copies


@pytest.mark.e2e
@pytest.mark.parametrize("umask, expected", [(0o022, 0o644), (0o077, 0o600)])
def test_run_outputs_have_the_modes_of_the_umask(tmp_path, umask, expected):
    result = rlexp(tmp_path, *TINY, "run_dir=outputs/r", umask=umask)
    assert result.returncode == 0, result.stderr
    run = tmp_path / "outputs/r"
    written = [run / "history.parquet", run / "history.png", run / "main.log", run / ".hydra/config.yaml",
               *run.glob("checkpoints/*.ckpt")]
    assert run / "checkpoints/last.ckpt" in written
    assert {p.name: mode_of(p) for p in written} == {p.name: expected for p in written}
    if umask == 0o022:
        plotted = rlexp(tmp_path, "mode=plot", "+runs=[outputs/r]", "+output=compare.png", umask=umask)
        assert plotted.returncode == 0, plotted.stderr
        compared = sorted(tmp_path.glob("compare.*"))
        assert compared and {p.name: mode_of(p) for p in compared} == {p.name: 0o644 for p in compared}


def rendered_bar(monkeypatch, width: int) -> list[str]:
    """The lines the training bar leaves on a `width`-column terminal at step 1,234,567 of 10,000,000."""
    import rich
    from rich.console import Console

    from rlexp.runs.progress import Progress

    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None)
    monkeypatch.setattr(rich, "_console", console)
    bar = Progress(10_000_000, mode="bar", precision=2)
    bar.start_time -= 100.0  # about 12,345 steps/s
    bar.update(1_234_567, 40, -123.45, 456.78)
    bar.close()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", console.file.getvalue())
    return [line for line in re.split(r"[\r\n]", text) if line.strip()]


@pytest.mark.parametrize("width", [30, 40, 80])
def test_progress_bar_keeps_the_whole_step_counts_on_a_narrow_terminal(monkeypatch, width):
    last = rendered_bar(monkeypatch, width)[-1]
    assert "1234567/10000000" in last and "…" not in last and len(last) <= width, last
    if width == 80:
        assert "mean -123.45 best 456.78" in last and re.search(r" 12,3\d\d steps/s ", last)


def test_progress_bar_shows_every_field_on_a_wide_terminal(monkeypatch):
    last = rendered_bar(monkeypatch, 160)[-1]
    assert last.startswith("train ") and "1234567/10000000" in last and "mean -123.45 best 456.78" in last
    assert "steps/s" in last and last.count(":") == 4  # elapsed and remaining time


def test_runs_that_picked_the_same_dir_name_in_one_second_each_claim_their_own(tmp_path):
    """Two runs started in the same second pick the same outputs/<date>/<time>_<agent>_<env> before either has
    made it; making it is the claim, so the second gets <name>_1 (and a third <name>_2), never the first's dir."""
    from rlexp.runs.dirs import claim_run_dir

    picked = tmp_path / "outputs" / "2026-11-25" / "14-10-48_ppo_HalfCheetah-v5"
    assert [claim_run_dir(picked) for _ in range(3)] == [picked, picked.with_name(picked.name + "_1"),
                                                         picked.with_name(picked.name + "_2")]
    assert sorted(p.name for p in picked.parent.iterdir()) == [picked.name, picked.name + "_1", picked.name + "_2"]


@pytest.mark.e2e
def test_train_claims_its_run_dir_before_it_builds_and_a_refused_build_leaves_no_folder(tmp_path):
    """Train's one pass: presets resolved, the config checked, the run dir claimed, then the envs and agent built.
    A run dir that can't be claimed is refused before any env is made (the env makes its marker file when built);
    a value only the build refuses (an agent that doesn't fit the env's actions) leaves no folder behind, not even
    outputs/."""
    marker = tmp_path / "env_made"
    corridor = ["env=generic", "env.id=MyEnvs/Corridor-v0", "env.imports=[my_envs]", "fallback=none",
                f"+env.kwargs={{marker:'{marker}'}}", "run.max_steps=64"]
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine\n")
    taken = rlexp(tmp_path, *corridor, "hydra.run.dir=full")
    assert taken.returncode == 2 and "full holds files already" in taken.stderr, taken.stdout + taken.stderr
    assert not marker.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["full"]
    refused = rlexp(tmp_path, *corridor, "agent=td3")  # the agent-env pairing: checked on the built envs
    assert "agent=td3 does not support discrete actions" in refused.stderr
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stdout + refused.stderr
    assert marker.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["env_made", "full"]


def test_an_env_without_a_preset_is_made_once_for_the_fallbacks_kind_and_training(tmp_path):
    """env=generic with an id no preset tunes: the fallback needs the env's kind, learned from one copy, and that
    copy is the first of the training envs. 3 training copies and 2 evaluation copies: 5 made, not 6."""
    marker = tmp_path / "made"
    run = rlexp(tmp_path, "agent=dqn", "env=generic", "env.id=MyEnvs/Corridor-v0", "env.imports=[my_envs]",
                f"+env.kwargs={{marker:'{marker}'}}", "env.n_envs=3", "env.vectorization=sync", "run.max_steps=64",
                "run.eval_episodes=2")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "fallbacks/dqn_discrete_vector.yaml" in run.stdout + run.stderr
    assert "3 envs in-process" in run.stdout and "eval 5.00 ± 0.00 over 2 episodes" in run.stdout, run.stdout
    assert marker.read_text() == "made\n" * 5


def test_a_resumed_runs_first_progress_line_counts_its_own_steps_after_new_episodes(monkeypatch, caplog):
    """Resumed at step 10,000 after 50 episodes: no line at 5 new episodes (log_frequency 10), then at 60 episodes
    and step 10,600 after 2 s, 600 steps / 2 s = 300 steps/s (not 10,600 / 2 s, nor one iteration's rate)."""
    from rlexp.runs import progress
    clock = iter([100.0, 102.0, 103.0])  # the start, then each line
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    bar = progress.Progress(20_000, mode="log", log_frequency=10, initial_steps=10_000, initial_episodes=50)
    with caplog.at_level("INFO", logger="rlexp"):
        bar.update(10_100, 55, 20.0, 25.0)
        bar.update(10_600, 60, 21.0, 25.0)
    assert caplog.messages == ["step 10,600/20,000 | 300 steps/s | episodes 60 | mean 21.00 | best 25.00"]


API_SCRIPT = """
import logging, sys
from rlexp import PPO, make_envs

if sys.argv[2] == "configured":
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="LOG %(message)s")
agent = PPO(make_envs("CartPole-v1", n_envs=4, seed=0), seed=0, n_steps=32, mini_batches=1)
summary = agent.fit(max_steps=3_000, verbose=int(sys.argv[1]))
print("trained", summary["steps"])
"""


@pytest.mark.parametrize("verbose, logging_setup", [(1, "none"), (0, "none"), (1, "configured")])
def test_python_api_progress_with_stdout_to_a_file(tmp_path, verbose, logging_setup):
    """As under nohup or Slurm: stdout is a file, and nothing but the script configures logging."""
    script = tmp_path / "train.py"
    script.write_text(API_SCRIPT)
    with open(tmp_path / "out.txt", "w") as out, open(tmp_path / "err.txt", "w") as err:
        done = subprocess.run([sys.executable, str(script), str(verbose), logging_setup], stdout=out, stderr=err,
                              timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    stdout, stderr = (tmp_path / "out.txt").read_text(), (tmp_path / "err.txt").read_text()
    assert done.returncode == 0, stderr[-2000:]
    progress_line = re.compile(r"step [\d,]+/3,000 \| [\d,]+ steps/s \| episodes \d+ \| mean [\d.]+ \| best ")
    assert stdout.splitlines()[-1] == "trained 3072"
    if logging_setup == "configured":  # through the script's own handler only, once
        assert not progress_line.search(stdout)
        assert len(progress_line.findall(stderr)) == stderr.count("LOG step ") >= 1
    else:
        assert bool(progress_line.search(stdout)) == (verbose == 1) and stderr == ""
