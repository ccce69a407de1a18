# Hydra config package (shipped in the wheel as rlexp.conf).
