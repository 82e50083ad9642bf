package family

import "fastvideo/fastvideo/api"

// LoRAPlanner is a Model whose DiT takes LoRA adapters: PlanLoRA opens and validates them against the
// model's weights (their names and shapes, from headers or the parameter table; nothing is loaded) and
// reports what each changes. Invalid adapters are a *RequestError for the "lora" field.
type LoRAPlanner interface {
	PlanLoRA(adapters []api.LoRA) ([]api.PlanLoRA, error)
}

// LoRAReporter is opened Components that merge adapters: LoRAPlan is what each changes (nil: none).
type LoRAReporter interface {
	LoRAPlan() []api.PlanLoRA
}
