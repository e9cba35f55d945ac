"""Training-time configuration: comm overlap, mixed precision, config container, initialization."""
