from rlexp.main import main

main()
