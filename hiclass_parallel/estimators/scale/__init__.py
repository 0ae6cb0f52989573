"""Training past one process and past memory: data-parallel training over
``torch.distributed`` (``_distributed``) and training from a torch ``Dataset`` or
``IterableDataset`` (``_streaming``)."""
