package fastvideo_test

import (
	"context"
	"fmt"
	"log"

	"fastvideo/fastvideo"
)

// Generate a clip with the built-in toy model (random weights: the video is noise). Point New at a
// MiniMax H3 or FastH3 snapshot folder for real output.
func ExampleVideoGenerator_Generate() {
	ctx := context.Background()
	g, err := fastvideo.New(ctx, "tiny-h3")
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	res, err := g.Generate(ctx, fastvideo.Request{
		Prompt:     "(S1) A fox says <d>[English] Hello from Go.</d>",
		OutputPath: "outputs/",
		Seed:       fastvideo.Ptr[int64](42),
		Progress: func(e fastvideo.Event) {
			if e.Kind == fastvideo.DenoiseStep {
				fmt.Printf("step %d/%d\n", e.Step, e.Steps)
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.OutputPath, res.Timings.Total)
}
