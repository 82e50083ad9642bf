// Package family is the contract between the SDK's public package (fastvideo) and the model
// families it runs (fastvideo/h3 for MiniMax H3, fastvideo/wan for Wan): the interfaces a family
// implements and the per-run services (engine, memory policy, session, progress) the pipeline hands
// to a family's stages. The data they exchange (requests, plans, results, events) is fastvideo/api's;
// the helpers families share are fastvideo/familykit's, the frame filters fastvideo/framefilter's.
//
// A generation is a pipeline of named stages (docs/architecture.md draws it):
//
//	validate -> condition -> denoise -> decode -> filter -> mux
//
// fastvideo runs validate, the frame filters and mux; a family supplies condition, denoise and
// decode through Stages. Adding a family is one package implementing Family plus one line in
// fastvideo's registry.
package family
