"""CosyVoice2-0.5B converter: its spec (the shared ``common/`` steps in order, its files, licence);
v2 is the form the shared export parts implement, so it has no networks of its own."""
