"""Small helpers shared by the training, recipe and launch code."""
