"""Everything that makes a model: loading one by name (loading), converting the packaged GGUFs once and checking the
copies (convert), precision copies and SmoothQuant (precision, smoothing), which names mean which model and which a
class server offers (names), the tiny random models (tiny), and Gemma's one-time conversion in a child process
(background). What a load produces (LoadedModel, ModelInfo) is engine.core.loaded's."""
