"""Results across runs: mode=plot's curves and tables, and seed statistics (rliable)."""
