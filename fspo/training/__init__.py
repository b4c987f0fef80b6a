"""The verl training job around the method: the entry point, the trainer hook, the reward manager and what they need."""
