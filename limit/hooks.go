package limit

import "github.com/callguard/callguard/internal/bridge"

func init() {
	bridge.LimitAcquire = (*Limiter).acquire
}
