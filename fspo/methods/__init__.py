"""The comparison methods on the same verifiers and data: KnowRL's reward, FAPO's penalty, F-DPO."""
