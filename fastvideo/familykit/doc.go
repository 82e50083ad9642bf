// Package familykit is what the model families (fastvideo/h3, fastvideo/wan) share beyond the
// family contract, written once so that the families differ only where their models do: snapshot
// folders and weight openers, the text parts and conditioner chain, random-weight sources, seeded
// noise streams, the request rules for sizes and noise, LoRA adapters opened, planned and merged as
// the DiT binds its weights, the tiny decoder and previews, the one VSA configuration and the
// attention window (docs/architecture.md, "Packages and the import direction").
package familykit
