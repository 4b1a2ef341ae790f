from rmqdump.cli.entry import main

main()
