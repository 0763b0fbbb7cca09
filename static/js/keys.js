// keys: filled in by issue 12's work.
