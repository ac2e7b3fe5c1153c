"""The box's ears: offline speech recognition, the speaker encoder, pronunciation scoring."""
