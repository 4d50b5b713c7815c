from pdprobe.cli.app import main

main()
