 05:36:30 up  6:09,  0 user,  load average: 2.03, 1.58, 1.25
