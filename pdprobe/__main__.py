from pdprobe.cli.app import entry

entry()
