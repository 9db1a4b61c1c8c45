"""Learning from the store: labels and the rules that suggest them, datasets (SFT, DPO,
KTO rows), training jobs and their detached worker, the A/B and held-out comparisons,
teaching runs, improvement rounds and the starter adapter. Never imports Textual."""
