from subsessions.cli import main

raise SystemExit(main())
