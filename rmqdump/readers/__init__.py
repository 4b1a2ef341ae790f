"""Store files as objects: mapped files, the CommitLog, ConsumeQueues, IndexFiles, checkpoint, config, the store model."""
