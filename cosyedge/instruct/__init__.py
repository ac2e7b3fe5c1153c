"""Natural-language instructions: the plan of explicit controls and the audio effects."""
