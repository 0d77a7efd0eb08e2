"""`python -m semipd.packaging sync|check`: see semipd.packaging.chart."""

from semipd.packaging.chart import main

raise SystemExit(main())
