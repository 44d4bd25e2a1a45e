package strategies

import (
	"strings"
	"testing"
)

func TestSinkDisplay(t *testing.T) {
	tests := []struct{ dsn, want string }{
		{"sqlite://microbatch.db", "sqlite://microbatch.db"},
		{"mysql://app:s3cret@db1:3306/analytics", "mysql://app:xxxxx@db1:3306/analytics"},
		{"app:s3cret@tcp(db1:3306)/analytics", "mysql://app:xxxxx@db1:3306/analytics"},
		{"redis://:s3cret@cache:6379/2", ""}, // checked below: no password
		{"kafka://k1:9092,k2:9092/out", "kafka://k1:9092,k2:9092/out"},
		{"file:///tmp/out/", "file:///tmp/out"},
		{"mysql://app:s3cret@db1:notaport/analytics", "mysql://…"},
		{"postgres://app:s3cret@db1/x", "postgres://app:xxxxx@db1:5432/x"},
		{"postgresql://app@db1:5433/x?password=s3cret", "postgresql://app:xxxxx@db1:5433/x"},
		{"postgres://app:s3cret@db1:notaport/x", "postgres://…"},
		{"oracle://app:s3cret@db1/x", "oracle://…"},
		{"app:s3cret@garbage", "(sink)"},
	}
	for _, tc := range tests {
		got := SinkDisplay(tc.dsn)
		if strings.Contains(got, "s3cret") {
			t.Errorf("SinkDisplay(%q) = %q: shows the password", tc.dsn, got)
		}
		if tc.want != "" && got != tc.want {
			t.Errorf("SinkDisplay(%q) = %q, want %q", tc.dsn, got, tc.want)
		}
	}
}
