from rmqdump.cli.app import main

main()
