// Command findings prints what chain.New says, at run time, of each of
// package rules' chains: the analyzer's test compares its findings with
// these.
package main

import (
	"encoding/json"
	"errors"
	"os"

	"example.com/fixture/rules"
	"github.com/callguard/callguard/chain"
)

func main() {
	out := map[string][]string{}
	for name, build := range map[string]func() (*chain.Chain, error){
		"CG001":         rules.CG001,
		"CG002":         rules.CG002,
		"CG003":         rules.CG003,
		"CG004":         rules.CG004,
		"CG004deadline": rules.CG004deadline,
		"CG005":         rules.CG005,
		"CG006":         rules.CG006,
		"CG007":         rules.CG007,
		"CG008":         rules.CG008,
		"CG009":         rules.CG009,
		"CG010":         rules.CG010,
		"CG011":         rules.CG011,
		"CG012":         rules.CG012,
		"CG013":         rules.CG013,
		"CG014":         rules.CG014,
		"CG015":         rules.CG015,
		"CG016":         rules.CG016,
		"CG017":         rules.CG017,
		"CG019":         rules.CG019,
		"CG021":         rules.CG021,
		"CG022":         rules.CG022,
		"CG023":         rules.CG023,
		"CG024":         rules.CG024,
		"CG025":         rules.CG025,
		"CG026":         rules.CG026,
		"CG027":         rules.CG027,
		"Recommended":   rules.Recommended,
	} {
		c, err := build()
		var fs []string
		if err != nil {
			var f chain.Finding
			if errors.As(err, &f) {
				fs = append(fs, "chain.New will fail: "+err.Error())
			} else {
				fs = append(fs, "chain.New will fail: "+err.Error())
			}
		} else {
			for _, f := range c.Findings() {
				fs = append(fs, f.String())
			}
		}
		out[name] = fs
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
}
