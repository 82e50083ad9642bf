package h3

// The fixture helpers of the internal tests, for the external quantized-checkpoint tests (package
// h3_test, which use only the public API) so that both read fixtures one way.
var (
	FixtureConfig  = fixtureConfig
	FixtureInputs  = fixtureInputs
	ConvertFixture = convertFixture
	FixtureArch    = fixtureArch
	TinyFixture    = tinyFixture
)
