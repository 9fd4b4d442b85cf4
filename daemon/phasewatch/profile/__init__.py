"""An engine's profile: what each line of its log means (load.py over profiles/<engine>.yaml), its
fallback word families, its remedies table; and the XID table beside its data (xid.yaml)."""
