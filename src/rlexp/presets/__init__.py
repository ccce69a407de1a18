"""Presets (conf/): which preset a run trains (a tuned preset, RL Zoo's row, or the fallback of the env's
kind), where presets come from (shipped, the user's --config-dir), autotune's portfolio, the presets'
completeness, --help's config groups and the generated option tables (`python -m rlexp.presets`)."""
