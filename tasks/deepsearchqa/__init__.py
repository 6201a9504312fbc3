"""DeepSearchQA (level 3): ReAct search-and-answer episodes, judged by an LLM."""
