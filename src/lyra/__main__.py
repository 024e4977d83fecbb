from lyra.cli import main

raise SystemExit(main())
