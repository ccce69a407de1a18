"""The rlexp command: `python -m rlexp [group=option ...] [key=value ...]` (train, play, eval, plot, init;
--multirun tunes). Hydra composes the config; `mode` picks the command (rlexp.commands)."""
from __future__ import annotations

import functools
import gc
import logging
import os
import re
import sys
import warnings
from argparse import Action
from typing import Any, Callable

import hydra
from omegaconf import DictConfig
from omegaconf.errors import InterpolationResolutionError

from rlexp.commands.autotune import autotune
from rlexp.commands.init import init_presets
from rlexp.commands.play import play_or_eval
from rlexp.commands.plot import plot_runs
from rlexp.commands.train import train
from rlexp.errors import RunFailed, Started, TrialFailed, UserError
from rlexp.runs.dirs import absolute, in_sweep
from rlexp.runtime.quiet import quiet_libraries, skip_keras_extras

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow is imported (lazily, in the task)

log = logging.getLogger("rlexp")


def train_or_population(cfg: DictConfig) -> float:
    """mode=train: one run, or with run.seeds a population (rlexp.commands.population)."""
    run = cfg.get("run", {})
    from rlexp.commands.population import is_population_dir

    resume = cfg.get("resume")
    if run.get("seeds") is not None or run.get("members") is not None or (
            resume and is_population_dir(absolute(str(resume)))):
        from rlexp.commands.population import train_population

        return train_population(cfg)
    return train(cfg)


MODES = {"train": train_or_population, "play": play_or_eval, "eval": play_or_eval, "plot": plot_runs, "init": init_presets,
         "autotune": autotune}


HYDRA_14 = tuple(int(part) for part in hydra.__version__.split(".")[:2]) >= (1, 4)
if HYDRA_14:  # rlexp's logging config names its own filter class: Hydra 1.4 runs it as before, with a warning
    warnings.filterwarnings("ignore", message="Hydra configured Python logging without an execution whitelist")


@hydra.main(config_path="pkg://rlexp.conf", config_name="config",
            **({} if HYDRA_14 else {"version_base": "1.3"}))  # 1.4 takes its own defaults and deprecates the key
def main(cfg: DictConfig) -> float:
    """Compose the config, dispatch `mode`, return the objective (mean evaluation return)."""
    gc.disable()  # until `startup_done`: importing TensorFlow and building the agent only allocate
    from rlexp.runtime.compile_cache import configure_compile_cache

    configure_compile_cache(cfg.get("run", {}).get("compile_cache", "auto"))  # before TensorFlow starts
    from rlexp.agents.base import TrainingDiverged

    Started.value = True
    from rlexp.runs.logs import quiet_shared_console

    quiet_shared_console()
    try:
        if cfg.mode not in MODES:
            raise UserError(f"mode={cfg.mode} is unknown; use one of {', '.join(MODES)}")
        from rlexp.checks.values import check_command, check_settings

        check_command(cfg)
        check_settings(cfg)
        return MODES[cfg.mode](cfg)
    except UserError as e:
        _fail(str(e), 2)
    except InterpolationResolutionError as e:  # a ${...} in a preset or on the command line that leads nowhere
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        _fail(f"{e.full_key or 'config'}: {message}; fix that ${{...}} in your preset or on the command line", 2)
    except RunFailed as e:
        _fail(str(e), 1)
    except TrainingDiverged as e:
        _fail(f"training diverged: {e}; the last good checkpoint is in checkpoints/last.ckpt", 1)
    except OSError as e:  # disk full, permissions, ... outside a run's training (which says what is on disk)
        _fail(f"could not write {e.filename or 'a file'}: {e.strerror or e} (free space or fix permissions)", 1)
    finally:  # a sweep's next trial in this process: this trial's objects can be collected again
        gc.unfreeze()
        gc.enable()
        if not in_sweep():
            from rlexp.runs.dirs import drop_empty_hydra_run_dir

            drop_empty_hydra_run_dir()


def _fail(message: str, code: int) -> None:
    """One line and an exit code; in a sweep the trial is recorded as failed with that line instead."""
    log.error(f"error: {message}")
    if in_sweep():
        raise TrialFailed(message) from None
    sys.exit(code)


def hydra_options() -> dict[str, Action]:
    """Hydra's command-line options: {flag: its argparse action}."""
    from hydra._internal.utils import get_args_parser

    return {flag: action for action in get_args_parser()._actions for flag in action.option_strings}


def options_first(args: list[str]) -> list[str]:
    """The command line with Hydra's options (--config-dir DIR, -cd=DIR, -m, ...) before the overrides, wherever
    they were given: Hydra's parser takes overrides only after the last option. An option whose value is optional
    (--info) takes the next argument only if that is not an override; given alone it is written with its default
    value (--info=all), so that the override after it is not read as its value."""
    options, overrides, actions = [], [], hydra_options()
    i = 0
    while i < len(args):
        flag, equals, _ = args[i].partition("=") if args[i].startswith("-") else (args[i], "", "")
        action = actions.get(flag)
        if action is None:
            overrides.append(args[i])
            i += 1
        elif equals or action.nargs == 0:
            options.append(args[i])
            i += 1
        elif action.nargs == "?":
            given = i + 1 < len(args) and not is_override_or_option(args[i + 1])
            options += [args[i], args[i + 1]] if given else [f"{args[i]}={action.const}"]
            i += 2 if given else 1
        else:
            options += args[i:i + 2]
            i += 2
    return options + overrides


def is_override_or_option(arg: str) -> bool:
    """Whether a command-line argument is an override (key=value, +key=value, ~key) or an option (-m)."""
    return arg.startswith(("-", "+", "~")) or "=" in arg


def with_env_preset(args: list[str]) -> list[str]:
    """`env.id=X` without `env=`: the command line with the env preset whose own id is X (env.id=Acrobot-v1:
    env=acrobot), else with env=generic, so that the id picks the tuned preset, the RL Zoo row and the run's name
    (a sweep over env.id sweeps env=generic). +resume keeps its run's env."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException
    from hydra_plugins.rlexp_searchpath import user_config_dir

    from rlexp.presets.sources import env_preset_for_id
    from rlexp.runs.dirs import GENERIC_ENV

    given = [arg for arg in args if re.match(r"\+{0,2}env\.id=", arg)]
    if len(given) != 1 or any(re.match(r"[+~]{0,2}env(=|$)", arg) or arg.startswith("+resume=") for arg in args):
        return args
    try:
        override = OverridesParser.create().parse_override(given[0])
    except OverrideParseException:
        return args  # (Hydra says what is wrong with it)
    if override.is_sweep_override():
        return [*args, f"env={GENERIC_ENV}"]
    preset = env_preset_for_id(str(override.value()), user_config_dir(args))
    return [*args, f"env={preset or GENERIC_ENV}"]


def check_config_dir(args: list[str]) -> None:
    """--config-dir names an existing directory (the presets of `mode=init +dir=DIR`)."""
    from hydra_plugins.rlexp_searchpath import user_config_dir

    directory = user_config_dir(args)
    if directory is None:
        return
    if not os.path.isdir(directory):
        problem = "is a file, not a directory" if os.path.exists(directory) else "does not exist"
        raise UserError(f"--config-dir {directory}: {os.path.abspath(directory)} {problem}; pass the directory of "
                        f"your presets, or make one with: python -m rlexp mode=init +dir={directory}")


def report_input_errors(report: Callable[[Callable[[], Any]], Any], func: Callable[[], Any]) -> Any:
    """Hydra's run_and_report, with Hydra's errors about the command line (unknown preset, unknown key, override
    syntax) as one line and exit code 2. HYDRA_FULL_ERROR=1 keeps Hydra's full report."""
    import yaml
    from hydra.errors import ConfigCompositionException, HydraException, OverrideParseException

    from rlexp.errors import hydra_error_line, output_dir_error

    def attempt() -> Any:
        try:
            return func()
        except (ConfigCompositionException, OverrideParseException, yaml.YAMLError) as e:
            line = None if os.environ.get("HYDRA_FULL_ERROR") == "1" else hydra_error_line(e)
            if line is None:
                raise
            print(f"error: {line}", file=sys.stderr)
            sys.exit(2)
        except HydraException as e:  # Hydra's basic sweeper given Optuna's interval(...)
            if "does not support sweep type" not in str(e) or os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            from rlexp.sweep.space import basic_sweeper_line

            print(f"error: {basic_sweeper_line(sys.argv[1:])}", file=sys.stderr)
            sys.exit(2)
        except TrialFailed as e:  # a job of Hydra's basic sweeper (its output was printed as it ended)
            print(f"error: a job of the sweep failed: {e}", file=sys.stderr)
            Started.value = True  # jobs ran: exit 1, not the 2 of a mistake in the command
            sys.exit(1)
        except OSError as e:  # Hydra could not make its output dir (hydra.run.dir) before the task started
            if Started.value or os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            print(f"error: {output_dir_error(e, sys.argv[1:])}", file=sys.stderr)
            sys.exit(2)

    return report(attempt)


def check_each_override(apply: Callable[[list[Any], DictConfig], None]) -> Callable[[list[Any], DictConfig], None]:
    """Hydra's step that applies the key=value overrides to the composed config, refusing first a key that goes
    below a value (agent.lr.x=3 where agent.lr is a number) with one line that says so."""
    from hydra.errors import ConfigCompositionException

    from rlexp.errors import value_as_section

    def apply_checked(overrides: list[Any], cfg: DictConfig) -> None:
        for override in overrides:
            if override.package is None and not (override.is_delete() or override.is_force_add()):
                line = value_as_section(override.key_or_group, cfg)
                if line is not None:
                    raise ConfigCompositionException(line)
            apply([override], cfg)

    apply_checked.checked = True  # type: ignore[attr-defined]
    return apply_checked


def cli() -> None:
    """The `rlexp` command: Hydra's own errors before the task starts (unknown group option, bad override
    syntax, missing config) are user input errors too, so they exit with 2 like ours."""
    # the agent and env presets pick the default network; an explicit model=auto means the same default
    args = with_env_preset(options_first([arg for arg in sys.argv[1:] if arg != "model=auto"]))
    sys.argv = sys.argv[:1] + args
    try:
        check_config_dir(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    # Two of Hydra's private functions are wrapped (its input errors as one line, each override checked); a Hydra
    # without them (checked: 1.3.x and 1.4.0rc3 have both) keeps its own messages instead of failing here.
    from hydra._internal import utils as hydra_utils

    run_and_report = getattr(hydra_utils, "run_and_report", None)
    if callable(run_and_report) and not isinstance(run_and_report, functools.partial):  # once per process
        hydra_utils.run_and_report = functools.partial(report_input_errors, run_and_report)
    from rlexp.presets.groups import list_groups_by_use

    list_groups_by_use()
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    apply_overrides = getattr(ConfigLoaderImpl, "_apply_overrides_to_config", None)
    if callable(apply_overrides) and not hasattr(apply_overrides, "checked"):  # once per process
        ConfigLoaderImpl._apply_overrides_to_config = staticmethod(  # type: ignore[method-assign]
            check_each_override(apply_overrides))
    from hydra_plugins.rlexp_sweeper import alias_optuna_sweeper

    alias_optuna_sweeper()  # configs naming hydra-optuna-sweeper's class
    try:
        main()
    except SystemExit as e:
        if e.code == 1 and not Started.value:
            sys.exit(2)
        raise


def console() -> None:
    """The `rlexp` console script and `python -m rlexp`: `cli` in a process of its own, so Keras loads without
    its optional imports that a run never uses (SciPy, pandas, scikit-learn, ...), and what TensorFlow and the
    run allocated is frozen before exit instead of walked by the interpreter's last collections (~1 s on 2
    cores; Python never promised to finalise those objects at exit). MuJoCo's and the ALE's messages that say
    nothing to act on stay off (`quiet_libraries`)."""
    skip_keras_extras()
    quiet_libraries()
    try:
        cli()
    finally:
        gc.freeze()
