// Package api is the data a caller exchanges with the SDK: the Request of one generation, the Plan it
// resolves to, the Events it reports and the Result it returns, with the dtypes, stages and memory
// decisions they name. Package fastvideo re-exports these types under the same names; the model
// families (fastvideo/h3, fastvideo/wan) read and fill them through the contract of fastvideo/family.
// Like ollama's api package it holds no behaviour beyond validating, formatting and encoding itself.
package api
