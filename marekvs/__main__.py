from marekvs.cli import main

raise SystemExit(main())
