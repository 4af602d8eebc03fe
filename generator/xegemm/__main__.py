from xegemm.cli import main

raise SystemExit(main())
