from rmqdump.cli import main

main()
