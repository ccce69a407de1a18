from rlexp.main import cli

cli()
