from rlvr.cli import main

main()
