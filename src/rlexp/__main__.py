from rlexp.main import console

console()
