from rlexp.presets.tables import agent_tables

print(agent_tables())
