from cqlstream.cli import main

raise SystemExit(main())
