"""Checks before work starts: every setting's value (one line naming the key and the fix), and the memory a
run will take against what the machine has."""
